"""``gluon-bbb COMMAND [FLAGS]`` (and ``python -m gluon_bbb COMMAND``): one entry point for the
package's commands (``gluon_bbb.commands``), each also ``python -m gluon_bbb.commands.COMMAND``.
``gluon-bbb COMMAND --help`` gives a command's flags."""
import importlib
import sys

from .commands import COMMANDS

USAGE = "usage: gluon-bbb COMMAND [FLAGS]   (gluon-bbb COMMAND --help)\n\ncommands:\n%s\n" % (
    "\n".join("  %-11s %s" % (name, words) for name, (_, words) in COMMANDS.items()))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        sys.stderr.write(USAGE)
        return 2
    if argv[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        sys.stderr.write("gluon-bbb: error: no command %r (one of %s)\n"
                         % (name, ", ".join(COMMANDS)))
        return 2
    module = importlib.import_module("gluon_bbb.commands." + COMMANDS[name][0])
    return module.run(rest, prog="gluon-bbb " + name)


if __name__ == "__main__":
    sys.exit(main())
