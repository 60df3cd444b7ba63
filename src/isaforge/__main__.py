import sys

try:
    from .cli import main
except KeyboardInterrupt:  # Ctrl-C while importing: as at any other moment
    sys.exit(130)

sys.exit(main())
