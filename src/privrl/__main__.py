import sys

from privrl.main import main

sys.exit(main())
