/**
 * The digits model trained in Spark two ways on the same data, partitions and iterations: gradients all-reduced by
 * JCCL inside barrier tasks, and the way Spark ML trains ({@code treeAggregate} of gradients, one Spark job per
 * iteration); {@link io.jccl.spark.example.SparkDigitsTraining}.
 */
package io.jccl.spark.example;
