package io.jccl.spark;

import io.jccl.collectives.Communicator;
import org.apache.spark.api.java.JavaRDD;
import scala.Function1;
import scala.jdk.javaapi.CollectionConverters;
import scala.reflect.ClassTag;
import scala.reflect.ClassTag$;

import java.io.Serializable;
import java.util.Arrays;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;

/**
 * Runs a function on every partition of an RDD as one JCCL job: a barrier stage whose tasks each get the
 * communicator of {@link SparkCommunicator#fromBarrierTask()} (closed when the function returns) and their
 * partition's rows; returns what each rank returned, in rank (= partition) order. Spark's Java API has no
 * {@code barrier()}; this is the Java-friendly way in. When a task fails, Spark relaunches all tasks of the stage
 * (a new attempt, with a new communicator: {@link SparkCommunicator}), up to {@code spark.stage.maxConsecutiveAttempts}
 * (4) times; the function must therefore be safe to run again.
 */
public final class BarrierJob {
    private BarrierJob() {
    }

    /**
     * One rank's work.
     *
     * @param <T> row type
     * @param <R> result type (serializable: it travels back to the driver)
     */
    @FunctionalInterface
    public interface RankFunction<T, R> extends Serializable {
        /** Runs rank {@code communicator.rank()} on its partition's rows. */
        R run(Communicator communicator, Iterator<T> rows) throws Exception;
    }

    /** Runs {@code function} on every partition of {@code data} as ranks of one communicator. */
    @SuppressWarnings("unchecked")
    public static <T, R> List<R> run(JavaRDD<T> data, RankFunction<T, R> function) {
        Function1<scala.collection.Iterator<T>, scala.collection.Iterator<Object>> perPartition =
            (Function1<scala.collection.Iterator<T>, scala.collection.Iterator<Object>> & Serializable) rows -> {
                try (Communicator communicator = SparkCommunicator.fromBarrierTask()) {
                    Object result = function.run(communicator, CollectionConverters.asJava(rows));
                    Object[] rankAndResult = {communicator.rank(), result};
                    return CollectionConverters.asScala(Collections.<Object>singletonList(rankAndResult).iterator());
                } catch (RuntimeException e) {
                    throw e;
                } catch (Exception e) {
                    throw new IllegalStateException("rank function failed: " + e, e);
                }
            };
        ClassTag<Object> tag = (ClassTag<Object>) (ClassTag<?>) ClassTag$.MODULE$.apply(Object.class);
        // The barrier stage feeds a shuffle, so that it is a shuffle map stage: Spark relaunches a failed barrier
        // shuffle map stage (up to spark.stage.maxConsecutiveAttempts), but aborts the job when a barrier *result*
        // stage fails ("Could not recover from a failed barrier ResultStage").
        Object collected = data.rdd().barrier().mapPartitions(perPartition, false, tag).repartition(1, null)
            .collect();
        Object[] results = new Object[data.getNumPartitions()];
        for (Object o : (Object[]) collected) {
            Object[] rankAndResult = (Object[]) o;
            results[(Integer) rankAndResult[0]] = rankAndResult[1];
        }
        return (List<R>) Collections.unmodifiableList(Arrays.asList(results));
    }
}
