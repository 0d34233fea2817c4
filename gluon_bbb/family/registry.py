"""The names a user's own prior, estimator or parametrization class takes on (``Prior``,
``Estimator``, ``Parametrization`` subclasses): defining a class with a ``name`` makes that name
one a ``Config`` accepts, in that Python process. A leaf module: it imports nothing."""


def register(known, cls, what):
    """Enter ``cls`` in ``known`` under ``cls.name`` (a class without a name is a base, left
    out). A built-in class's name stays the built-in one's: ValueError for a user's class that
    takes it; a user's class defined again (a notebook cell run twice) replaces the first."""
    if cls.name is None:
        return
    taken = known.get(cls.name)
    if (taken is not None and taken.__module__.startswith("gluon_bbb.")
            and not cls.__module__.startswith("gluon_bbb.")):
        raise ValueError("%s name %r is gluon_bbb's own %s; give %s another name"
                         % (what, cls.name, taken.__name__, cls.__name__))
    known[cls.name] = cls
