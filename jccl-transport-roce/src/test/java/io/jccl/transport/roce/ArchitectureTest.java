package io.jccl.transport.roce;

import io.jccl.common.testing.ArchitectureRules;
import io.jccl.common.testing.ArchitectureRules.Rule;
import org.junit.jupiter.api.Test;

import java.util.Set;

/**
 * The roce provider references only the verbs API and its SPI, {@code io.jccl.common..} and itself: never another
 * provider, the collectives, the tools, the examples or the benchmarks.
 */
class ArchitectureTest {
    private static final Rule RULE = ArchitectureRules.providerRule("io.jccl.transport.roce");

    /** Every package with public types has a package-info.java. */
    private static final Set<String> PACKAGES_WITHOUT_PACKAGE_INFO = Set.of();

    @Test
    void shouldDependOnlyOnTheVerbsApi() {
        RULE.check(ArchitectureRules.mainClasses());
    }

    @Test
    void shouldDocumentEveryPackageWithPublicTypes() {
        ArchitectureRules.checkPackageInfo(ArchitectureRules.mainSources(), PACKAGES_WITHOUT_PACKAGE_INFO);
    }
}
