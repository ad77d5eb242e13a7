package io.jccl.collectives;

import io.jccl.common.testing.ArchitectureRules;
import io.jccl.common.testing.ArchitectureRules.Rule;
import org.junit.jupiter.api.Test;

import java.util.Set;

/**
 * The collectives reference only the public verbs API ({@code io.jccl.verbs}, not the provider SPI
 * {@code io.jccl.verbs.spi}), {@code io.jccl.common..} and themselves: never {@code io.jccl.transport..} (providers are
 * found at run time by device name and capability), never the tools, the examples or the benchmarks.
 */
class ArchitectureTest {
    private static final Rule RULE = ArchitectureRules
        .rule("collectives see only the public verbs API and jccl-common (no provider SPI, no provider class:"
            + " providers are found at run time by device name and capability)")
        .allow("io.jccl.verbs", "io.jccl.common..", "io.jccl.collectives..");

    /** Packages with public types and no package-info.java: none (an entry here would excuse one). */
    private static final Set<String> PACKAGES_WITHOUT_PACKAGE_INFO = Set.of();

    @Test
    void shouldSeeOnlyTheVerbsApi() {
        RULE.check(ArchitectureRules.mainClasses());
    }

    @Test
    void shouldDocumentEveryPackageWithPublicTypes() {
        ArchitectureRules.checkPackageInfo(ArchitectureRules.mainSources(), PACKAGES_WITHOUT_PACKAGE_INFO);
    }
}
