import sys

from fedcli.cli import early

early.install()  # signals from the first instant (fedcli/cli/early.py)

from fedcli.cli.main import main  # noqa: E402

sys.exit(main())
