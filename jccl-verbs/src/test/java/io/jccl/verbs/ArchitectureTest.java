package io.jccl.verbs;

import io.jccl.common.testing.ArchitectureRules;
import io.jccl.common.testing.ArchitectureRules.Rule;
import org.junit.jupiter.api.Test;

import java.util.Set;

/**
 * The verbs API and the provider SPI reference only {@code io.jccl.common..} and themselves: no provider, no
 * collectives, no tools, examples or benchmarks. Providers are found at run time ({@code ServiceLoader}, or a built-in
 * provider's class name held as a string in {@link Verbs}), never compiled against.
 */
class ArchitectureTest {
    private static final Rule RULE = ArchitectureRules
        .rule("the verbs layer depends only on jccl-common (never a provider, the collectives or the tools)")
        .allow("io.jccl.common..", "io.jccl.verbs", "io.jccl.verbs.spi");

    /** Packages with public types and no package-info.java: none (an entry here would excuse one). */
    private static final Set<String> PACKAGES_WITHOUT_PACKAGE_INFO = Set.of();

    @Test
    void shouldDependOnlyOnCommon() {
        RULE.check(ArchitectureRules.mainClasses());
    }

    @Test
    void shouldDocumentEveryPackageWithPublicTypes() {
        ArchitectureRules.checkPackageInfo(ArchitectureRules.mainSources(), PACKAGES_WITHOUT_PACKAGE_INFO);
    }
}
