"""What this machine has, probed without a GPU context: the NVIDIA driver and its GPUs (in a
child process with a deadline), performance-counter access, NVIDIA's wheels and toolkits,
Python and hookmagic's own versions and extras.

Each probe returns plain dicts (JSON-ready) that say what was found, where, and why not;
:mod:`hookmagic.checkup` turns them into the report with a fix for every missing piece.
"""
