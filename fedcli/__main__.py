import sys

from fedcli.cli.main import main

sys.exit(main())
