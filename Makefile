# The quick start's two commands. Each first installs what it needs (scripts/setup.sh), skipping
# what an earlier run did, so a second run goes straight to the work.
#
#   make run [PROMPT="..."] [ARGS="-n 60 -t 0"]   the default model answers PROMPT
#   make test [PYTEST_ARGS="-q tests/test_cli.py"]  the test suite
#   make setup                                     everything both need, nothing run
#   make sanitize                                  the C core under ASan + UBSan (scripts/sanitize.sh)
#
# PYTHON=/path/to/python picks the interpreter (default python3), e.g. a virtual environment's.

PYTHON ?= python3
PROMPT ?= Write a haiku about the sea.
ARGS ?=
PYTEST_ARGS ?= -q
# through the environment, so quotes in a prompt reach the program as typed (a `$` given on
# make's command line is written `$$`, make's own rule)
export PYTHON PROMPT

.PHONY: run test setup sanitize

run:
	bash scripts/setup.sh run
	"$$PYTHON" -m isaforge run "$$PROMPT" $(ARGS)

test:
	bash scripts/setup.sh test
	"$$PYTHON" -m pytest $(PYTEST_ARGS)

setup:
	bash scripts/setup.sh all

sanitize:
	bash scripts/sanitize.sh
