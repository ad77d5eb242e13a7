/**
 * JCCL inside Spark's barrier execution mode: {@link io.jccl.spark.SparkCommunicator#fromBarrierTask()} gives the
 * tasks of a barrier stage ({@code rdd.barrier().mapPartitions(...)}) one {@link io.jccl.collectives.Communicator},
 * bootstrapped from what Spark already provides (the barrier's task infos and {@code allGather}); docs/spark.md.
 */
package io.jccl.spark;
