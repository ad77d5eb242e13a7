package io.jccl.spark;

import io.jccl.common.testing.ArchitectureRules;
import io.jccl.common.testing.ArchitectureRules.Rule;
import org.junit.jupiter.api.Test;

import java.util.Set;

/**
 * The Spark module sees the collectives' public API and its store, jccl-common and Spark: no provider (they are
 * chosen at run time like everywhere else) and no internal package of the collectives. Only the example touches
 * the digits model of jccl-examples.
 */
class ArchitectureTest {
    private static final Rule RULE = ArchitectureRules
        .rule("jccl-spark reads only the collectives' public API, its store and jccl-common")
        .allow("io.jccl.collectives", "io.jccl.collectives.store", "io.jccl.common", "io.jccl.spark..",
            "io.jccl.examples.digits");

    private static final Rule LIBRARY = ArchitectureRules
        .rule("the library part of jccl-spark does not depend on its example")
        .governs("io.jccl.spark.example..", "io.jccl.examples..")
        .allow();

    @Test
    void shouldSeeOnlyThePublicApi() {
        RULE.check(ArchitectureRules.mainClasses());
    }

    @Test
    void shouldKeepTheExampleOutOfTheLibrary() {
        java.util.SortedMap<String, java.util.SortedSet<String>> refs =
            ArchitectureRules.references(ArchitectureRules.mainClasses());
        refs.keySet().removeIf(c -> c.startsWith("io.jccl.spark.example."));
        org.junit.jupiter.api.Assertions.assertEquals(java.util.List.of(), LIBRARY.violationsIn(refs));
    }

    @Test
    void shouldDocumentEveryPackageWithPublicTypes() {
        ArchitectureRules.checkPackageInfo(ArchitectureRules.mainSources(), Set.of());
    }
}
