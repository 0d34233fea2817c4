"""IVON in a Gluon model of your own: the optimizer ``"ivon"`` in a ``gluon.Trainer``, the
weights drawn from its posterior for each step (``sampled_params``), and its Monte Carlo
predictive afterwards (``predict_probabilities``).

    python examples/ivon_gluon.py [--data-dir DIR] [--epochs N] [--train-size N]
"""
import argparse

import mxnet as mx
from mxnet import autograd, gluon, nd

from gluon_bbb import load_mnist
from gluon_bbb.learning.ivon import predict_probabilities, sampled_params


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--train-size", type=int, default=10000)
    args = parser.parse_args()
    data = load_mnist(args.data_dir)
    mx.random.seed(0)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(400, activation="relu", in_units=784),
            gluon.nn.Dense(10, in_units=400))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    train_size = args.train_size
    # ess: the number of training images; the update is IVON's (gluon_bbb/learning/ivon.py)
    trainer = gluon.Trainer(net.collect_params(), "ivon",
                            {"learning_rate": 0.2, "ess": train_size, "hess_init": 0.1})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    X = nd.array(data.train_images[:train_size])
    y = nd.array(data.train_labels[:train_size])
    for epoch in range(args.epochs):
        for i in range(0, train_size, 100):
            with sampled_params(trainer):  # the weights drawn from the posterior
                with autograd.record():
                    loss = loss_fn(net(X[i:i + 100]), y[i:i + 100])
                loss.backward()
            trainer.step(100)  # IVON's update of the means and the Hessian estimate
        probs = predict_probabilities(net, trainer, nd.array(data.test_images), num_samples=10)
        accuracy = (probs.argmax(axis=1).asnumpy() == data.test_labels).mean()
        print("epoch %d: test accuracy of the predictive (10 draws) %.4f" % (epoch + 1,
                                                                           accuracy))


if __name__ == "__main__":
    main()
