/**
 * The shared-memory verbs provider ({@code shm}, device {@code shm0}): reliable-connected queue pairs between
 * processes of one host. Region memory lives in files under {@code /dev/shm} mapped with FFM; RDMA WRITE and READ
 * are single copies into or out of the peer's mapping, atomics are VarHandle atomics on the shared mapping, and
 * SEND/RECV go through a lock-free receive ring in the receiver's queue-pair file. Design, file layouts and
 * measurements: {@code docs/transport-shm.md}.
 */
package io.jccl.transport.shm;
