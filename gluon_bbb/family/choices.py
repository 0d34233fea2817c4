"""Looking a choice up by its name in config.json: the choice objects (``Choice``, ``named``)
and the classes a user may subclass (``Registry``: a subclass with a ``name`` is one a ``Config``
accepts, in that Python process). A leaf module: it imports only the errors."""
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


class Registry(dict):
    """The classes of one kind (priors, estimators, parametrizations) by name, built-in ones
    first."""

    def __init__(self, what):
        super().__init__()
        self.what = what

    def add(self, cls):
        """Enter ``cls`` under ``cls.name`` (a class without a name is a base, left out); a
        user's class may not take a built-in one's name."""
        if cls.name is None:
            return
        taken = self.get(cls.name)
        if taken is not None and _built_in(taken) and not _built_in(cls):
            raise ValueError("%s name %r is gluon_bbb's own %s; give %s another name"
                             % (self.what, cls.name, taken.__name__, cls.__name__))
        self[cls.name] = cls

    def kind(self, name):
        """The class ``name`` names (``-`` read as ``_``); ConfigError otherwise."""
        found = self.get(str(name).replace("-", "_"))
        if found is None:
            raise ConfigError(self.what, name, "one of %s" % ", ".join(self))
        return found

    def built_in(self):
        return [cls for cls in self.values() if _built_in(cls)]

    def built_in_kind(self, name):
        """The built-in class ``name`` names (``-`` read as ``_``), else None: a user's class,
        an unknown name, or not a name."""
        found = self.get(name.replace("-", "_")) if isinstance(name, str) else None
        return found if found is not None and _built_in(found) else None


def _built_in(cls):
    return cls.__module__.startswith("gluon_bbb.")


def names(choices):
    """The config.json names of ``choices``, in order (for --help and argparse)."""
    return tuple(dict.fromkeys(choice.name for choice in choices))  # each name once
