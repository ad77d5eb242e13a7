package io.jccl.transport.shm;

import io.jccl.conformance.ProviderConformanceSuite;

/** Runs the provider conformance kit against the shared-memory provider (device {@code shm0}). */
class ShmConformanceTest extends ProviderConformanceSuite {
    @Override
    protected String deviceName() {
        return "shm0";
    }
}
