"""Command line: ``torch-nsight`` (or ``python -m torch_nsight``).

One module per subcommand, each with ``add_parser(subparsers)`` and ``run(args) -> int``;
:func:`torch_nsight.cli.main.main` dispatches and turns library errors into one line.
"""
