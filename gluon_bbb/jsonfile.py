"""Every JSON file the package reads, read one way: bounded in size and nesting, strict (no NaN
or infinity), and checked against its schema, each field by its kind's rule (``errors.py``);
a refusal names the file and the field. Imports nothing but the package's errors.

A schema is a dict of field -> rule, a rule a callable ``rule(value, name)`` that returns the
value as the package takes it or raises ``ConfigError`` naming ``name``: ``number``,
``whole``, ``text``, ``flag``, ``one_of``, ``optional``, ``list_of``, ``record`` build them.
"""
import json
import math

from .errors import ConfigError, FLOAT32_MAX, check_proportion, is_real, require_whole

# no file the package writes nests deeper than a few levels, or is larger than a history of
# a million epochs
MAX_DEPTH = 32
MAX_BYTES = 1 << 28


def parse(data, source, error, max_bytes=MAX_BYTES):
    """The JSON value of ``data`` (bytes or text) read from ``source``; ``error`` (an exception
    class of the package's, taking a template and values) on one line where it is larger than
    ``max_bytes``, nests deeper than ``MAX_DEPTH``, holds NaN or infinity, or is not JSON."""
    if len(data) > max_bytes:
        raise error("%s: %d bytes, more than the %d such a file holds", source, len(data),
                    max_bytes)
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise error("cannot read %s: not UTF-8 text (%s)", source, exc.reason) from None
    depth = _depth(data)
    if depth > MAX_DEPTH:
        raise error("cannot read %s: it nests %d levels deep, more than the %d such a file "
                    "holds", source, depth, MAX_DEPTH)
    try:
        return json.loads(data, parse_constant=_refuse_constant)
    except _NonFinite as exc:
        raise error("cannot read %s: it holds %s, which JSON does not (a figure must be a "
                    "finite number)", source, exc.args[0]) from None
    except ValueError as exc:
        raise error("cannot read %s: %s", source, exc) from None


def read(path, error, max_bytes=MAX_BYTES, what=""):
    """``parse`` of the file ``path`` (a ``what``, in messages); ``error`` where it cannot be
    read."""
    source = "%s %s" % (what, path) if what else path
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise error("cannot read %s: %s", source, (exc.strerror or str(exc)).lower()) from None
    return parse(data, source, error, max_bytes)


def check(value, schema, source, error, kind="object"):
    """``value`` (a JSON object) with each field of ``schema`` checked by its rule (a field
    the object lacks is checked as None: ``optional`` takes it); ``error`` naming the file and
    the field where one is refused. Fields the schema does not name are kept as they are."""
    if not isinstance(value, dict):
        raise error("%s is not a JSON %s (it holds %s)", source, kind, type(value).__name__)
    checked = dict(value)
    for name, rule in schema.items():
        try:
            result = rule(value.get(name), name)
        except ConfigError as exc:
            raise error("%s: field %s", source, exc.describe()) from None
        if name in value or result is not None:
            checked[name] = result
    return checked


class _NonFinite(ValueError):
    pass


def _refuse_constant(name):
    raise _NonFinite(name)


def _depth(text):
    """How deep the arrays and objects of JSON ``text`` nest (strings skipped)."""
    depth = deepest = 0
    inside = escaped = False
    for char in text:
        if inside:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                inside = False
        elif char == '"':
            inside = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


# The rules.

def number(low=-FLOAT32_MAX, high=FLOAT32_MAX):
    """A finite number in [low, high], as a float."""
    def rule(value, name):
        if not (is_real(value) and math.isfinite(value) and low <= value <= high):
            raise ConfigError(name, value, "a finite number of magnitude at most %.3g (float32's "
                              "largest)" % high if (low, high) == (-FLOAT32_MAX, FLOAT32_MAX)
                              else "a finite number in [%g, %g]" % (low, high))
        return float(value)
    return rule


def proportion(value, name):
    """A number in [0, 1]."""
    return check_proportion(value, name)


def whole(low=0, high=None):
    """A whole number from ``low`` (to ``high``)."""
    return lambda value, name: require_whole(name, value, low, high)


def text(value, name):
    """A string."""
    if not isinstance(value, str):
        raise ConfigError(name, value, "a string")
    return value


def flag(value, name):
    """true or false."""
    if not isinstance(value, bool):
        raise ConfigError(name, value, "true or false")
    return value


def one_of(*choices):
    def rule(value, name):
        if value not in choices:
            raise ConfigError(name, value, "one of %s" % ", ".join(map(str, choices)))
        return value
    return rule


def optional(inner):
    """``inner``'s value, or None where the field is absent or null."""
    def rule(value, name):
        return None if value is None else inner(value, name)
    return rule


def list_of(inner, low=0, high=None):
    """A list of ``low`` to ``high`` items, each taken by ``inner``."""
    def rule(value, name):
        if not (isinstance(value, list) and low <= len(value)
                and (high is None or len(value) <= high)):
            raise ConfigError(name, value if not isinstance(value, list) else "%d items"
                              % len(value), "a list of %s items" % (
                                  "%d or more" % low if high is None else
                                  "%d to %d" % (low, high)))
        return [inner(item, "%s[%d]" % (name, i)) for i, item in enumerate(value)]
    return rule


def mapping_of(inner):
    """An object each of whose values ``inner`` takes."""
    def rule(value, name):
        if not isinstance(value, dict):
            raise ConfigError(name, value, "an object")
        return {key: inner(item, "%s.%s" % (name, key)) for key, item in value.items()}
    return rule


def record(schema):
    """An object whose fields ``schema`` checks (other fields kept)."""
    def rule(value, name):
        if not isinstance(value, dict):
            raise ConfigError(name, value, "an object")
        checked = dict(value)
        for field, inner in schema.items():
            result = inner(value.get(field), "%s.%s" % (name, field))
            if field in value or result is not None:
                checked[field] = result
        return checked
    return rule


def scalar(value, name):
    """A flag's value as a spec gives it: a string, a number, true or false, or null."""
    if value is not None and not isinstance(value, (str, bool)) and not (
            is_real(value) and math.isfinite(value)):
        raise ConfigError(name, value, "a string, a number, true, false or null")
    return value


def path_of(value, name):
    """A string naming a path (a recorded directory, say)."""
    if not (isinstance(value, str) and value and "\0" not in value):
        raise ConfigError(name, value, "a path")
    return value

