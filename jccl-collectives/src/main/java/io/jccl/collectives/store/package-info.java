/**
 * Rendezvous stores (Gloo's {@code rendezvous} and torch's {@code TCPStore}): small key-value stores through which
 * ranks find each other before any queue pair exists. {@link io.jccl.collectives.store.TcpStore} and its server,
 * {@link io.jccl.collectives.store.FileStore} for a shared file system, and
 * {@link io.jccl.collectives.store.InMemoryStore} for ranks in one JVM. The TCP store listens where the job's store
 * address points, authenticates every connection when {@code JCCL_AUTH_SECRET} is set, and bounds what a client can
 * make it hold ({@link io.jccl.collectives.store.TcpStoreServer.Settings}).
 */
package io.jccl.collectives.store;
