"""Text: tokenizers (llama2.c's, and those carried inside GGUF/HF files), chat templates,
stop strings, the incremental UTF-8 decoder, and grammars over a tokenizer's vocabulary
(grammar.py, structured output). Imports only core, quant and formats."""
