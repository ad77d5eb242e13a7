package io.jccl.services.ingest;

/**
 * A consumer's counters: what it read, skipped and made durable, and the ingest-to-visible lag (producer's stamp at
 * append to the consumer's handler call, both on the epoch clock: across hosts it includes their clock offset).
 *
 * @param records records handed to the handler
 * @param bytes their payload bytes
 * @param durableRecords records in committed snapshots (acknowledged to their producers)
 * @param snapshots snapshots committed
 * @param holes reservations skipped because nobody committed them within the hole timeout (a producer died or gave
 *     up its lease); their producers, if alive, send the records again
 * @param holeBytes bytes those holes spanned
 * @param malformed records dropped for a bad length, producer id or CRC32C
 * @param duplicates records dropped because their sequence was already accepted (resent after a reconnection)
 * @param outOfOrder records dropped because an earlier one of their producer is missing (the producer resends from
 *     the missing one)
 * @param staleCommits commit notifications for positions already skipped
 * @param lagLastNs the last record's lag
 * @param lagP50Ns median lag
 * @param lagP99Ns 99th percentile of the lag
 * @param lagMaxNs largest lag
 */
public record IngestStats(long records, long bytes, long durableRecords, long snapshots, long holes, long holeBytes,
                          long malformed, long duplicates, long outOfOrder, long staleCommits, long lagLastNs,
                          long lagP50Ns, long lagP99Ns, long lagMaxNs) {
}
