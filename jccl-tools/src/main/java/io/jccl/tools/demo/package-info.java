/**
 * {@code jccl demo}: ranks train a small multilayer perceptron on the shipped digits data set data-parallel, with
 * gradients all-reduced every step, then print an all-reduce table.
 */
package io.jccl.tools.demo;
