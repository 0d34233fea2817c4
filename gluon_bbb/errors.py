"""Exceptions for bad input that the command-line tools turn into one-line messages."""


class GluonBBBError(Exception):
    """Base class: an error caused by the user's input, not by a bug."""


class DataError(GluonBBBError):
    """MNIST files are missing, truncated or corrupt."""


class ContextError(GluonBBBError):
    """The requested device does not exist or cannot be parsed."""


class CheckpointError(GluonBBBError):
    """A checkpoint is missing, unreadable or does not match the model."""


class OutputError(GluonBBBError):
    """An output location is not a directory or cannot be written."""


class RunDirectoryBusy(GluonBBBError):
    """Another process holds the run directory's lock."""


class TrainingDiverged(GluonBBBError):
    """The loss became non-finite; carries the epoch and batch where it happened."""

    def __init__(self, epoch, batch, value):
        self.epoch, self.batch, self.value = epoch, batch, value
        super().__init__(
            "loss became non-finite (%s) at epoch %d, batch %d; stopping. "
            "The last checkpoint (if any) is from an earlier epoch and is intact; "
            "try a smaller --learning-rate." % (value, epoch, batch))


class ConfigError(GluonBBBError, ValueError):
    """An invalid hyper-parameter; names the config field and the offending value."""

    def __init__(self, field, value, requirement):
        self.field, self.value, self.requirement = field, value, requirement
        super().__init__("%s must be %s, got %r" % (field, requirement, value))
