package io.jccl.benchmarks;

import io.jccl.common.testing.ArchitectureRules;
import io.jccl.common.testing.ArchitectureRules.Rule;
import org.junit.jupiter.api.Test;

import java.util.Set;

/**
 * The benchmarks see every layer and the tools ({@code JitSettle}), but not the conformance kit, which is test code;
 * a new io.jccl package has to be added here on purpose. (Only the tools, the benchmarks and tests may reference
 * {@code io.jccl.tools}: every other module's rule leaves it out.)
 */
class ArchitectureTest {
    private static final Rule RULE = ArchitectureRules
        .rule("the benchmarks may use every layer and the tools, but not the test kit")
        .allow("io.jccl.common..", "io.jccl.verbs..", "io.jccl.transport..", "io.jccl.collectives..",
            "io.jccl.services..", "io.jccl.examples..", "io.jccl.tools..", "io.jccl.benchmarks..");

    /** Packages with public types and no package-info.java: none (an entry here would excuse one). */
    private static final Set<String> PACKAGES_WITHOUT_PACKAGE_INFO = Set.of();

    @Test
    void shouldNotDependOnTestCode() {
        RULE.check(ArchitectureRules.mainClasses());
    }

    @Test
    void shouldDocumentEveryPackageWithPublicTypes() {
        ArchitectureRules.checkPackageInfo(ArchitectureRules.mainSources(), PACKAGES_WITHOUT_PACKAGE_INFO);
    }
}
