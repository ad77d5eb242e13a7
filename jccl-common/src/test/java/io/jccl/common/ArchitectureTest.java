package io.jccl.common;

import io.jccl.common.testing.ArchitectureRules;
import io.jccl.common.testing.ArchitectureRules.Rule;
import org.junit.jupiter.api.Test;

import java.util.Set;

/**
 * jccl-common is the bottom of the stack: its compiled classes reference only the JDK ({@code java..}, {@code javax..},
 * {@code jdk..}) and {@code io.jccl.common..}; no other io.jccl package and no third-party library.
 */
class ArchitectureTest {
    private static final Rule RULE = ArchitectureRules.rule("jccl-common depends on the JDK only")
        .governs("..")
        .allow("java..", "javax..", "jdk..", "io.jccl.common..");

    /** Every package with public types has a package-info.java. */
    private static final Set<String> PACKAGES_WITHOUT_PACKAGE_INFO = Set.of();

    @Test
    void shouldDependOnTheJdkOnly() {
        RULE.check(ArchitectureRules.mainClasses());
    }

    @Test
    void shouldDocumentEveryPackageWithPublicTypes() {
        ArchitectureRules.checkPackageInfo(ArchitectureRules.mainSources(), PACKAGES_WITHOUT_PACKAGE_INFO);
    }
}
