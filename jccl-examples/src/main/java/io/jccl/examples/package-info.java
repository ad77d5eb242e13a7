/**
 * Runnable examples of the verbs API ({@code ./jccl example NAME}): a parameter server over one-sided WRITE and
 * READ, sequenced WRITE_WITH_IMM, per-operation latency, and explicit queue-pair setup.
 */
package io.jccl.examples;
