/**
 * The provider SPI (rdma-core's {@code driver.h}): what a provider implements ({@link io.jccl.verbs.spi.VerbsProvider},
 * found with {@link java.util.ServiceLoader}) and the software core every provider shares: the queue-pair state
 * machine and posting rules ({@link io.jccl.verbs.spi.AbstractQueuePair}), key tables, a completion queue in
 * software, and counters readable from outside the process. Providers depend on this and on the verbs API only.
 */
package io.jccl.verbs.spi;
