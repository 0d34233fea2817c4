"""gluon-bbb: Bayes by Backprop (Blundell et al. 2015) for MNIST in functional MXNet NDArray code."""
from .checkpoint import load_checkpoint, save_checkpoint
from .config import Config
from .context import context_name, parse_context
from .data import MNIST, load_mnist, read_idx, resolve_data_dir
from .errors import (CheckpointError, ConfigError, ContextError, DataError, GluonBBBError,
                     TrainingDiverged)
from .model import (combined_loss, evaluate_accuracy, gaussian_prior, init_variational_params,
                    layer_param_shapes, log_gaussian, log_softmax_likelihood, net,
                    sample_epsilons, scale_mixture_prior, softplus, transform_gaussian_samples,
                    transform_rhos)
from .train import TrainResult, bbb_loss, kl_weights, load_run_config, train

__version__ = "0.1.0"
