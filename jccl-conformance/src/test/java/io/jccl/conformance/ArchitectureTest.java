package io.jccl.conformance;

import io.jccl.common.testing.ArchitectureRules;
import io.jccl.common.testing.ArchitectureRules.Rule;
import org.junit.jupiter.api.Test;

/**
 * The conformance kit runs against any provider, so it sees only the verbs API and its SPI (and jccl-common): never a
 * provider class, the collectives, the tools, the examples or the benchmarks. The kit is test code
 * ({@code target/test-classes}, published as a test-jar), so that is what is scanned.
 */
class ArchitectureTest {
    private static final Rule RULE = ArchitectureRules
        .rule("the conformance kit sees only the verbs API and SPI, never a provider")
        .allow("io.jccl.verbs", "io.jccl.verbs.spi", "io.jccl.common..", "io.jccl.conformance..");

    @Test
    void shouldSeeOnlyTheVerbsApi() {
        RULE.check(ArchitectureRules.testClasses());
    }
}
