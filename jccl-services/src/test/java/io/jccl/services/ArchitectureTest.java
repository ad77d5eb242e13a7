package io.jccl.services;

import io.jccl.common.testing.ArchitectureRules;
import io.jccl.common.testing.ArchitectureRules.Rule;
import org.junit.jupiter.api.Test;

import java.util.Set;

/**
 * The services reference the public verbs API ({@code io.jccl.verbs}, not the provider SPI), jccl-common and the
 * collectives (store, bootstrap pieces): never {@code io.jccl.transport..}. Providers are reached through the verbs
 * API and what devices say they are (reach, link layer), so the services work the same over every provider.
 */
class ArchitectureTest {
    private static final Rule RULE = ArchitectureRules
        .rule("services see only the public verbs API, jccl-common and the collectives (no provider SPI, no provider"
            + " class: providers are reached through the verbs API and capabilities)")
        .allow("io.jccl.verbs", "io.jccl.common..", "io.jccl.collectives..", "io.jccl.services..");

    /** Packages with public types and no package-info.java: none. */
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
