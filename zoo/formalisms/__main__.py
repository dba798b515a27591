"""``python -m zoo.formalisms verify <dataset> ...``; see ``zoo.formalisms.verify``."""
import sys

from zoo.formalisms.verify import main

sys.exit(main())
