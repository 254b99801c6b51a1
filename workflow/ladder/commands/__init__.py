"""One module per ``ladder`` verb (``run`` and ``test`` are the shell script's), each its
arguments and exit codes over the layers, as asv's ``commands`` are: ``unlock_command``
(``run``'s lock check), ``render_command``, ``fleet_command``, ``compare_command``,
``bisect_command``, ``overlay_command``, ``paths_command``. Nothing imports this package."""
