"""Text: tokenizers (llama2.c's, and those carried inside GGUF/HF files), chat templates,
stop strings and the incremental UTF-8 decoder. Imports only core, quant and formats."""
