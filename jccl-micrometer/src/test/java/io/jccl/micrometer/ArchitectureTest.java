package io.jccl.micrometer;

import io.jccl.common.testing.ArchitectureRules;
import io.jccl.common.testing.ArchitectureRules.Rule;
import org.junit.jupiter.api.Test;

import java.util.Set;

/**
 * The binding sees the collectives' API, the public verbs API ({@link io.jccl.verbs.Counter}) and Micrometer: no
 * provider, no provider SPI, no internal package of the collectives.
 */
class ArchitectureTest {
    private static final Rule RULE = ArchitectureRules
        .rule("the Micrometer binding reads only the collectives' and verbs' public API")
        .allow("io.jccl.collectives", "io.jccl.verbs", "io.jccl.micrometer");

    @Test
    void shouldSeeOnlyThePublicApi() {
        RULE.check(ArchitectureRules.mainClasses());
    }

    @Test
    void shouldDocumentEveryPackageWithPublicTypes() {
        ArchitectureRules.checkPackageInfo(ArchitectureRules.mainSources(), Set.of());
    }
}
