"""Record llama.cpp's token ids for SmolLM2 on a varied corpus (reference data for tests).

Run with a Python that has llama-cpp-python (nothing else is needed):

    python scripts/record_tokenizer_ids.py [MODEL.gguf] [-o tests/data/smollm2_tokenizer_ids.json]

tests/test_tokenizer_hf.py compares isaforge's encoder against the written file, so the tests
need only the GGUF, not llama_cpp.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import llama_cpp

# (text, special): special=True parses control-token texts such as <|im_start|> as tokens
CORPUS: list[tuple[str, bool]] = [
    ("", False),
    ("Hello, world!", False),
    ("The quick brown fox jumps over the lazy dog.", False),
    ("Once upon a time, there was a little girl named Lily. She loved to play outside.", False),
    ("I'm sure you'll see they've done it; we'd say it's 'quoted' and \"double\".", False),
    ("IT'S LOUD and It'S MiXeD", False),
    (" leading space", False),
    ("trailing space ", False),
    ("trailing spaces   ", False),
    ("two  spaces and three   spaces", False),
    ("    four leading spaces", False),
    ("\ttab\tseparated\t\tvalues\t", False),
    ("line one\nline two\n", False),
    ("\n", False),
    ("\n\n\n", False),
    ("para\n\n\nnext para", False),
    ("  \n  \n", False),
    (" ", False),
    ("   ", False),
    ("\r\nwindows\r\nlines\r\n", False),
    ("mixed \t \n whitespace \u00a0nbsp\u2003em-space\u3000ideographic", False),
    ("1", False),
    ("12345678901234567890", False),
    ("3.14159 and 2.71828, -42, +7, 1e-10, 0x1F, 1,000,000", False),
    ("in 2024 there were 365 days; 10:30 am; v1.2.3", False),
    ("½ ² ³ Ⅻ ٣٤٥ १२३ ０１２", False),
    ("def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n", False),
    ("class A:\n\tdef __init__(self):\n\t\tself.x = {'a': [1, 2]}  # comment\n", False),
    ('{"name": "SmolLM2", "layers": 30, "dims": [576, 1536], "ok": true, "n": null}', False),
    ("#include <stdio.h>\nint main(void) {\n    printf(\"%d\\n\", 42);\n    return 0;\n}\n",
     False),
    ("x+=1;y--;if(a&&b||!c){z=a<<2>>1^~b;}//done", False),
    ("<html><body><p class=\"x\">Hi &amp; bye</p></body></html>", False),
    ("https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct?x=1&y=2#frag", False),
    ("email: someone@example.com, path: C:\\Users\\me\\file.txt", False),
    ("Emoji: 😀 👍🏽 🇫🇷 ❤️ 👨‍👩‍👧‍👦 🏳️‍🌈 🧑🏻‍💻", False),
    ("😀😀😀", False),
    ("中文分词测试：今天天气很好。", False),
    ("日本語のテキストとカタカナ、ひらがな。", False),
    ("한국어 문장입니다.", False),
    ("Café naïve façade résumé Ångström Ørsted Straße", False),
    ("cafe\u0301 nai\u0308ve (combining marks) a\u0323\u0302", False),
    ("Ελληνικά και русский текст", False),
    ("مرحبا بالعالم، هذا نص عربي.", False),
    ("नमस्ते दुनिया, यह हिंदी पाठ है।", False),
    ("ไทย ภาษา", False),
    ("Zero\u200bwidth\u200dand\ufeffBOM", False),
    ("control \x01\x07 chars \x7f", False),
    ("bytes without a token: a\x04b \x04 c\x06\x13\x14\x16\x1dd", False),
    ("A long paragraph. " * 20 + "It ends here.", False),
    ("<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n", True),
    ("<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n", False),
    ("<|endoftext|>", True),
    ("<|endoftext|>", False),
    ("text<|im_end|>more text", True),
    ("text<|im_end|>more text", False),
    (" <|im_start|> spaced <|im_end|> ", True),
    ("<|im_start|><|im_end|><|im_start|>", True),
    ("<|im_start|", True),
    ("<repo_name>x<file_sep>y<filename>z<gh_stars>5", True),
    ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
     "<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n", True),
]


def main() -> None:
    default = Path.home() / ".cache" / "isaforge" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default=str(default))
    ap.add_argument("-o", "--out",
                    default=str(Path(__file__).resolve().parents[1] / "tests" / "data"
                                / "smollm2_tokenizer_ids.json"))
    a = ap.parse_args()
    llm = llama_cpp.Llama(a.model, vocab_only=True, verbose=False)
    cases = [{"text": t, "special": s,
              "ids": llm.tokenize(t.encode("utf-8"), add_bos=False, special=s)}
             for t, s in CORPUS]
    data = {"model": os.path.basename(a.model), "llama_cpp": llama_cpp.__version__,
            "cases": cases}
    lines = ",\n".join("  " + json.dumps(c, ensure_ascii=False) for c in cases)
    head = json.dumps({k: v for k, v in data.items() if k != "cases"}, ensure_ascii=False)
    Path(a.out).write_text(head[:-1] + ', "cases": [\n' + lines + "\n]}\n", encoding="utf-8")
    print(f"wrote {len(cases)} cases to {a.out}")


if __name__ == "__main__":
    main()
