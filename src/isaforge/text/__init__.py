"""Text: tokenizers (llama2.c's, and those carried inside GGUF/HF files), chat templates,
stop strings, the incremental UTF-8 decoder, and grammars over a tokenizer's vocabulary
(grammar.py; structured.py reads what a request asks for: response_format, grammar,
a forcing tool_choice). Imports only core, quant and formats."""
