package io.jccl.tools;

import io.jccl.common.testing.ArchitectureRules;
import io.jccl.common.testing.ArchitectureRules.Rule;
import org.junit.jupiter.api.Test;

import java.util.Set;

/**
 * The tools see every layer (docs/ARCHITECTURE.md), but not the benchmarks, which depend on them, nor the
 * conformance kit, which is test code. A new io.jccl package has to be added here on purpose.
 */
class ArchitectureTest {
    private static final Rule RULE = ArchitectureRules
        .rule("the tools may use every layer but never the benchmarks or the test kit")
        .allow("io.jccl.common..", "io.jccl.verbs..", "io.jccl.transport..", "io.jccl.collectives..",
            "io.jccl.examples..", "io.jccl.tools..");

    /** Packages with public types and no package-info.java: none (an entry here would excuse one). */
    private static final Set<String> PACKAGES_WITHOUT_PACKAGE_INFO = Set.of();

    @Test
    void shouldNotDependOnBenchmarksOrTestCode() {
        RULE.check(ArchitectureRules.mainClasses());
    }

    @Test
    void shouldDocumentEveryPackageWithPublicTypes() {
        ArchitectureRules.checkPackageInfo(ArchitectureRules.mainSources(), PACKAGES_WITHOUT_PACKAGE_INFO);
    }
}
