/**
 * The embedding cache (issue 18, part 4): a table of rows of floats in a server's registered memory, looked up
 * one-sided by batched READs (no server CPU), a bounded CLOCK cache of hot rows per client, updates by WRITE under a
 * per-row seqlock (a lookup never returns a torn row) and invalidations to subscribed clients by notification. Built
 * on the transfer engine ({@link io.jccl.services.transfer.TransferEngine}). Entry points:
 * {@link io.jccl.services.embedding.EmbeddingServer} and {@link io.jccl.services.embedding.EmbeddingClient}.
 */
package io.jccl.services.embedding;
