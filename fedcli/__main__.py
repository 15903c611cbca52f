import sys

from fedcli import early

early.install()  # signals from the first instant (fedcli/early.py)

from fedcli.cli.main import main  # noqa: E402

sys.exit(main())
