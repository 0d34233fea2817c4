"""A fast path applies to the formula it was written for. A hand-written gradient, a closed form
or a code of the C kernels is written against one class's formulas (a prior's ``log_density``,
a parametrization's ``sigma``, an estimator's ``draw``); a subclass that overrides one of those
formulas and not the fast path would otherwise train with the old formula's fast path."""
import functools


def _definer(cls, name):
    """The class of ``cls``'s method resolution order whose own namespace holds ``name``."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return klass
    return None


def overridden(obj, owner, formulas):
    """The names of ``formulas`` that ``type(obj)`` defines below ``owner`` (overrides of the
    formulas ``owner`` wrote a fast path for)."""
    return [name for name in formulas if _definer(type(obj), name) not in owner.__mro__]


def holds(obj, name):
    """Whether ``obj``'s member ``name`` is there (not None) and, where it is a fast path, still
    computes ``obj``'s formulas."""
    owner = _definer(type(obj), name)
    member = vars(owner).get(name) if owner is not None else None
    return member is not None and not overridden(obj, owner, getattr(member, "formulas", ()))


def accelerates(*formulas):
    """Decorator of a method written as a fast path of the methods ``formulas``."""
    def decorate(fast):
        name = fast.__name__

        @functools.wraps(fast)
        def dispatch(self, *args, **kwargs):
            owner = next(klass for klass in type(self).__mro__ if vars(klass).get(name) is dispatch)
            if not overridden(self, owner, formulas):
                return fast(self, *args, **kwargs)
            return getattr(super(owner, self), name)(*args, **kwargs)
        dispatch.formulas = formulas
        return dispatch
    return decorate


class Keyed:
    """A class attribute (a kernel code, a flag) that holds for the formulas it names, as the
    class that sets it defines them: on an instance of a subclass that overrides one, None."""

    def __init__(self, value, *formulas):
        self.value, self.formulas, self.owner = value, formulas, None

    def __set_name__(self, owner, name):
        self.owner = owner

    def __get__(self, obj, cls=None):
        if obj is None or not overridden(obj, self.owner, self.formulas):
            return self.value
        return None


def lost_fast_paths(obj):
    """``[(fast path, owner, overridden formulas)]`` of every fast path ``obj``'s class inherits
    but cannot use, because it overrides a formula that fast path was written for."""
    lost = []
    for name in sorted(dir(type(obj))):
        owner = _definer(type(obj), name)
        member = vars(owner).get(name) if owner is not None else None
        formulas = getattr(member, "formulas", None)
        if formulas:
            changed = overridden(obj, owner, formulas)
            if changed:
                lost.append((name, owner, changed))
    return lost


def describe_lost(obj):
    """``lost_fast_paths(obj)`` in words, over lines of at most 100 characters, or None:
    "Laplace overrides GaussianPrior's log_density; not used: __call__, kl, ..."."""
    import textwrap
    lost = lost_fast_paths(obj)
    if not lost:
        return None
    by_cause = {}
    for name, owner, changed in lost:
        by_cause.setdefault((owner.__name__, tuple(changed)), []).append(name)
    return "\n".join(textwrap.fill("%s overrides %s's %s; not used: %s" % (
        type(obj).__name__, owner, ", ".join(changed), ", ".join(names)), 100,
        subsequent_indent="    ") for (owner, changed), names in by_cause.items())
