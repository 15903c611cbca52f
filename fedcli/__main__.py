import sys

from fedcli.runtime import early

early.install()  # signals from the first instant (fedcli/runtime/early.py)

from fedcli.cli.main import main  # noqa: E402

sys.exit(main())
