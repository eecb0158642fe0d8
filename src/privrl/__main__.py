import sys

from privrl.cli import main

sys.exit(main())
