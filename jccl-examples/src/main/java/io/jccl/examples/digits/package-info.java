/**
 * The digits data set (8×8 handwritten digits, shipped as a resource) and the small multilayer perceptron that
 * {@code jccl demo}, the service examples and their tests train: one model and one data set, so results of the
 * all-reduce demo, the parameter server and the elastic demo can be compared with each other.
 */
package io.jccl.examples.digits;
