/**
 * Rendezvous stores (Gloo's {@code rendezvous} and torch's {@code TCPStore}): small key-value stores through which
 * ranks find each other before any queue pair exists. {@link io.jccl.collectives.store.TcpStore} and its server,
 * {@link io.jccl.collectives.store.FileStore} for a shared file system, and
 * {@link io.jccl.collectives.store.InMemoryStore} for ranks in one JVM.
 */
package io.jccl.collectives.store;
