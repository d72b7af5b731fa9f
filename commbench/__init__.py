"""commbench: collective-communication benchmarks and training-layout planning.

Importing this package is cheap and never imports torch; the measuring modules import it
when they run.
"""

__version__ = "0.1.0"
