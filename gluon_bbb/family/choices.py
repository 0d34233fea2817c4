"""What every choice object a run makes shares (``Choice``): its name in config.json, older
names that still read (``aliases``), and looking one up by name (``named``). A leaf module: it
imports only the errors."""
from ..errors import ConfigError


def named(kind, choices, name, field):
    """The object of ``choices`` called ``name`` (a name, or one of the objects itself);
    ConfigError naming ``field`` otherwise."""
    if isinstance(name, kind):
        return name
    for choice in choices:
        if name == choice.name or name in choice.aliases:
            return choice
    raise ConfigError(field, name, "one of %s" % ", ".join(c.name for c in choices))


class Choice:
    """A named choice; ``aliases`` are older names that still read."""
    name = None
    aliases = ()

    def __str__(self):
        return self.name

    def __repr__(self):
        return "<%s %s>" % (type(self).__name__, self.name)

    def __eq__(self, other):
        return type(self) is type(other)

    def __hash__(self):
        return hash(type(self))


# The model kind: what is learnt and how it predicts.


def names(choices):
    """The config.json names of ``choices``, in order (for --help and argparse)."""
    return tuple(dict.fromkeys(choice.name for choice in choices))  # each name once
