/**
 * Internal: the memory a communicator hands out ({@code Communicator.allocate}), which both paths use without
 * registering or copying it. Not API; may change without notice.
 */
package io.jccl.collectives.memory;
