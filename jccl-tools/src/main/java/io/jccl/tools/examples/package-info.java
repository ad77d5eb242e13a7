/** {@code jccl example}: runs the programs of jccl-examples from the tools' class path. */
package io.jccl.tools.examples;
