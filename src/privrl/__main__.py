"""`python -m privrl`: as the `privrl` command, without the working directory on the import
path (`python -m` puts it first): a module that happens to sit in the directory where privrl
is run must not shadow an import, nor be imported by `--env module:callable` unasked
(docs/environments.md)."""

import os
import sys

if sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

from privrl.main import main

sys.exit(main())
