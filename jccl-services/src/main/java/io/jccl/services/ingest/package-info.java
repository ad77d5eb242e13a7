/**
 * The feature ingestion ring: an append-only log in a consumer's registered memory that producers reserve with an
 * atomic FETCH_ADD on its tail, fill with RDMA WRITE and publish with WRITE_WITH_IMM; the consumer reads committed
 * records in order, snapshots them to disk (CRC32C per record, fsync, atomic rename) and acknowledges what is
 * durable, so producers keep every record until it is. Entry points: {@link io.jccl.services.ingest.IngestConsumer}
 * and {@link io.jccl.services.ingest.IngestProducer}; the protocol is in docs/services.md, "Feature ingestion".
 */
package io.jccl.services.ingest;
