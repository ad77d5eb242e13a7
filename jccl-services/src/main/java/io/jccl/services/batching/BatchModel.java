package io.jccl.services.batching;

import java.lang.foreign.MemorySegment;

/**
 * The model an {@link InferenceServer} runs on each batch it forms. The service does not know what the model is
 * (jccl-services depends on no model library): the digits MLP of jccl-examples, a native runtime or a test function
 * plug in here.
 */
@FunctionalInterface
public interface BatchModel {
    /**
     * Runs one batch. {@code inputs} holds {@code batchSize} rows of {@link BatchingConfig#inputBytes()} bytes each
     * (a request shorter than that is padded with zeros), {@code outputs} has room for {@code batchSize} rows of
     * {@link BatchingConfig#outputBytes()} bytes; row {@code i} of the outputs goes back to the requester of row
     * {@code i}. Called on the server's batching thread, one batch at a time; an exception fails every request of
     * the batch with {@link InferenceStatus#MODEL_ERROR}.
     */
    void run(MemorySegment inputs, int batchSize, MemorySegment outputs);
}
