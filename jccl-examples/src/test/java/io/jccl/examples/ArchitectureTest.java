package io.jccl.examples;

import io.jccl.common.testing.ArchitectureRules;
import io.jccl.common.testing.ArchitectureRules.Rule;
import org.junit.jupiter.api.Test;

import java.util.Set;

/**
 * The examples are what a user writes: they reference only the public verbs API ({@code io.jccl.verbs}) and
 * themselves, and pick providers by device name ({@code shm0}, {@code tcp0}). No provider SPI, no provider class, no
 * jccl-common, no collectives beyond the public store and options a service joins a job with (widened on purpose
 * for TransferEngineExample, which uses jccl-services), never the tools.
 */
class ArchitectureTest {
    private static final Rule RULE = ArchitectureRules
        .rule("examples use only the public verbs API (providers are found by device name)")
        .allow("io.jccl.verbs", "io.jccl.examples..", "io.jccl.services..", "io.jccl.collectives",
            "io.jccl.collectives.store");

    /** Packages with public types and no package-info.java: none (an entry here would excuse one). */
    private static final Set<String> PACKAGES_WITHOUT_PACKAGE_INFO = Set.of();

    @Test
    void shouldUseOnlyThePublicVerbsApi() {
        RULE.check(ArchitectureRules.mainClasses());
    }

    @Test
    void shouldDocumentEveryPackageWithPublicTypes() {
        ArchitectureRules.checkPackageInfo(ArchitectureRules.mainSources(), PACKAGES_WITHOUT_PACKAGE_INFO);
    }
}
