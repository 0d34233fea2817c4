"""Exceptions for bad input and for interruptions, which the commands turn into one-line
messages."""


class _FieldNames(dict):
    def __init__(self, name_of):
        super().__init__()
        self.name_of = name_of

    def __missing__(self, field):
        return self.name_of(field)


def _literal(text):
    """``text`` as it should read in a message template: no braces or percent signs taken as
    fields or values."""
    return str(text).replace("{", "{{").replace("}", "}}").replace("%", "%%")


class GluonBBBError(Exception):
    """Base class: an error caused by the user's input or environment, not by a bug."""

    def __init__(self, template, *values):
        super().__init__(template, *values)
        self.template, self.values = template, values

    def describe(self, name_of=str):
        """The message with each field shown as ``name_of(field)``."""
        return self.template.format_map(_FieldNames(name_of)) % self.values

    def __str__(self):
        return self.describe()


class DataError(GluonBBBError):
    """MNIST files are missing, truncated or corrupt."""


class DataNotFound(DataError):
    """No directory searched holds the dataset; the message lists the directories."""


class ContextError(GluonBBBError):
    """The requested device does not exist or cannot be parsed."""


class CheckpointError(GluonBBBError):
    """A checkpoint or another file of a run directory is missing, unreadable or does not match
    the model, or the run cannot be resumed as asked."""


class OutputError(GluonBBBError):
    """An output location is not a directory or cannot be written (a full disk included)."""


class NonFiniteResult(GluonBBBError):
    """A figure a command would print or write came out NaN or infinite: nothing is written."""


class RunDirectoryBusy(GluonBBBError):
    """Another process holds the run directory's lock."""


class ResourceError(GluonBBBError):
    """The run would need more memory than the machine has."""


class TrainingDiverged(GluonBBBError):
    """The loss became non-finite; carries the epoch and batch where it happened, and says what
    is known of the cause: whether any update had been made, at which learning rate, and the
    run's first loss where it is known (a start so extreme that its first gradient overflows
    is not the learning rate's fault)."""

    EXTREME_FIRST_LOSS = 1e10  # a first mini-batch loss is 1e2 to 1e5 for MNIST networks

    # the settings that set the first loss, which ``changed`` picks from
    START_FIELDS = ("mu_scale", "rho_offset", "gate_rho_offset", "sigma_p", "sigma_p1",
                    "sigma_p2", "kl_scale", "ivon_hess_init", "ivon_ess", "ivon_weight_decay",
                    "num_hidden_layers")

    def __init__(self, epoch, batch, value, updates=None, learning_rate=None, first_loss=None,
                 parameter=None, since_batch=None, changed=()):
        """``changed``: (field, value) of the run's ``START_FIELDS`` that differ from the
        defaults, named first as the likeliest cause of a start that overflows."""
        self.epoch, self.batch, self.value = epoch, batch, value
        if parameter is None:
            where = "loss became non-finite (%s) at epoch %d, batch %d; stopping. " % (
                value, epoch, batch)
        else:
            # the parameters are read where the losses are: the update that broke them is
            # known to lie between two such readings
            where = ("%s became non-finite (%s) at epoch %d, in batches %d to %d, while the "
                     "losses were finite; stopping. " % (parameter, value, epoch, since_batch,
                                                         batch))
        kept = "The last checkpoint (if any) is from an earlier epoch and is intact. "
        start = ("the initial weights ({mu_scale}, {rho_offset}, {gate_rho_offset}), the prior "
                 "({sigma_p}, {sigma_p1}, {sigma_p2}), the KL term's scale ({kl_scale}), IVON's "
                 "({ivon_hess_init}, {ivon_ess}, {ivon_weight_decay}) or the network's depth "
                 "({num_hidden_layers})")
        if changed:
            start = "%s (this run's, of %s)" % (_changed_words(changed), start)
        if updates == 0:
            cause = ("It is non-finite before any update, so the cause is the starting point, "
                     "not the learning rate: " + start + " make the first loss overflow.")
        elif first_loss is not None and abs(first_loss) > self.EXTREME_FIRST_LOSS:
            cause = ("The first loss was already %.3g, so the cause is the starting point, not "
                     "the learning rate: %s give a loss, and a gradient, that overflow after %d "
                     "update%s." % (first_loss, start, updates, "" if updates == 1 else "s"))
        elif updates is not None and changed:
            cause = ("It was finite for %d updates at {learning_rate} %g with %s: the steps "
                     "these give are too large; a smaller {learning_rate}, those settings "
                     "nearer their defaults or a tighter prior may help."
                     % (updates, learning_rate, _changed_words(changed)))
        elif updates is not None:
            cause = ("It was finite for %d updates at {learning_rate} %g: the steps are too "
                     "large; a smaller {learning_rate} or a tighter prior may help."
                     % (updates, learning_rate))
        else:
            cause = ""
        super().__init__(_literal(where) + _literal(kept) + cause)


def _changed_words(changed):
    """``{field} value and ...`` of (field, value) pairs, as a message template holds them."""
    return " and ".join("{%s} %s" % (field, _literal(
        "%g" % value if isinstance(value, float) else value)) for field, value in changed)


class ConfigError(GluonBBBError, ValueError):
    """An invalid hyper-parameter; names the config field and the offending value."""

    def __init__(self, field, value, requirement):
        self.field, self.value, self.requirement = field, value, requirement
        # the requirement may name other fields ({train_size}); its percent signs are literal;
        # a field within a file's object (``input.pixel_scale``, ``tensors[0].kept``) is words
        named = "{%s}" % field if str(field).isidentifier() else _literal(field)
        super().__init__("%s must be %s, got %%r" % (named, requirement.replace("%", "%%")),
                         value)


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped the work: ``signal_name`` says which, ``saved`` what of the
    work is kept (a sentence or None), ``resumable`` whether a resume can continue it."""

    def __init__(self, signal_name="SIGINT", saved=None, resumable=False):
        super().__init__(signal_name, saved, resumable)
        self.signal_name, self.saved, self.resumable = signal_name, saved, resumable


# The one rule of each kind of number a flag, a file or a public function takes. Parameters and
# their updates are float32: a setting must be a number float32 holds as it is (0, or of
# magnitude from its smallest normal number to its largest: numpy.finfo(numpy.float32)), and a
# NumPy scalar is a number like any other.
FLOAT32_TINY = 1.1754943508222875e-38
FLOAT32_MAX = 3.4028234663852886e38
# the most draws a Monte Carlo predictive averages (a pass over the images each): the bound of
# --test-samples, of the predictives' num_samples and of a compressed model's header
MAX_PREDICTIVE_SAMPLES = 1000


def is_real(value):
    """Whether ``value`` is a real number: a Python or NumPy int or float, not a bool."""
    import numbers
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and type(value).__name__ != "bool_")


def is_whole(value):
    """Whether ``value`` is a whole number: a Python or NumPy integer, not a bool."""
    import numbers
    return (isinstance(value, numbers.Integral) and not isinstance(value, bool)
            and type(value).__name__ != "bool_")


def is_float32(value):
    """Whether ``value`` is a real number float32 holds as it is: 0, or a finite magnitude
    from float32's smallest normal number to its largest."""
    return is_real(value) and (value == 0 or FLOAT32_TINY <= abs(value) <= FLOAT32_MAX)


def require_real(field, value, low=-FLOAT32_MAX, high=FLOAT32_MAX, low_open=False,
                 high_open=False, words=None):
    """``float(value)``; ConfigError naming ``field`` unless it is a float32 number (``is_float32``)
    in the interval from ``low`` to ``high`` (open at either end as asked), said as ``words``
    where given."""
    if not (is_float32(value) and (low < value if low_open else low <= value)
            and (value < high if high_open else value <= high)):
        if words is None and (low, high) == (-FLOAT32_MAX, FLOAT32_MAX):
            words = ("a number float32 holds (0, or a magnitude from %.3g to %.3g)"
                     % (FLOAT32_TINY, FLOAT32_MAX))
        elif words is None:
            words = "in %s%s, %s%s" % ("(" if low_open else "[", _bound(low), _bound(high),
                                       ")" if high_open else "]")
            if is_real(value) and 0 < abs(value) < FLOAT32_TINY:
                words += " (float32 holds no magnitude below %.3g)" % FLOAT32_TINY
        raise ConfigError(field, value, words)
    return float(value)


def require_positive(field, value, high=FLOAT32_MAX):
    """``float(value)``; ConfigError naming ``field`` unless it is a float32 number > 0 and at
    most ``high``."""
    return require_real(field, value, 0.0, high, low_open=True, words=(
        "a finite number > 0 (from %.3g to %.3g: float32's normal numbers)"
        % (FLOAT32_TINY, FLOAT32_MAX) if high == FLOAT32_MAX else
        "a number from %.3g (float32's smallest normal number) to %g" % (FLOAT32_TINY, high)))


def require_whole(field, value, low=0, high=None):
    """``int(value)``; ConfigError naming ``field`` unless it is a whole number from ``low``
    (to ``high``)."""
    if not (is_whole(value) and value >= low and (high is None or value <= high)):
        raise ConfigError(field, value, "an integer >= %d" % low if high is None
                          else "an integer in [%d, %d]" % (low, high))
    return int(value)


def check_proportion(proportion, field="proportions"):
    """``float(proportion)``; ConfigError naming ``field`` unless it is a probability: a
    number in [0, 1]."""
    if not (is_real(proportion) and 0.0 <= proportion <= 1.0):
        raise ConfigError(field, proportion, "in [0, 1]")
    return float(proportion)


def _bound(value):
    return {FLOAT32_MAX: "float32's largest", -FLOAT32_MAX: "float32's lowest"}.get(
        value, "%g" % value)
