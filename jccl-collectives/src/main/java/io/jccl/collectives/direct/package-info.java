/**
 * Internal: the direct path, when every rank shares one host and maps its peers' memory: the control block
 * ({@link io.jccl.collectives.direct.ControlBlockFlyweight}), flag barriers with CPU-aware waiting
 * ({@link io.jccl.collectives.direct.DirectBarrier}) and the direct algorithms, which load and store each other's
 * staging buffers and {@code Communicator.allocate} memory instead of sending messages. Not API; may change without
 * notice.
 */
package io.jccl.collectives.direct;
