package io.jccl.common.testing;

import io.jccl.common.testing.ArchitectureRules.Rule;
import io.jccl.common.testing.ArchitectureRules.Violation;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.lang.classfile.Annotation;
import java.lang.classfile.AnnotationElement;
import java.lang.classfile.AnnotationValue;
import java.lang.classfile.ClassFile;
import java.lang.classfile.Label;
import java.lang.classfile.MethodSignature;
import java.lang.classfile.Signature;
import java.lang.classfile.attribute.RuntimeVisibleAnnotationsAttribute;
import java.lang.classfile.attribute.SignatureAttribute;
import java.lang.constant.ClassDesc;
import java.lang.constant.ConstantDescs;
import java.lang.constant.MethodTypeDesc;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Set;
import java.util.SortedSet;
import java.util.TreeSet;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The scanner can fail: every kind of reference is found, and forbidden ones are reported by name. */
class ArchitectureRulesTest {
    private static final Rule PROVIDER_RULE = ArchitectureRules.rule("providers depend only on the verbs API")
        .allow("io.jccl.verbs..", "io.jccl.common..", "io.jccl.transport.tcp..");

    /**
     * A class of the tcp provider's package that reaches every forbidden class through exactly one kind of
     * reference, so each assertion below proves one path of the scanner.
     */
    private static byte[] fixture() {
        ClassDesc self = ClassDesc.of("io.jccl.transport.tcp.Fixture");
        return ClassFile.of(ClassFile.StackMapsOption.DROP_STACK_MAPS).build(self, cb -> {
            cb.withSuperclass(ClassDesc.of("io.jccl.collectives.Base"));                  // class entry
            cb.withInterfaceSymbols(ClassDesc.of("io.jccl.verbs.spi.VerbsProvider"));       // allowed
            cb.withField("array", ClassDesc.of("io.jccl.tools.FieldType").arrayType(2),     // field descriptor only
                ClassFile.ACC_PRIVATE);
            cb.withField("generic", ConstantDescs.CD_List, fb -> fb                           // type argument only
                .withFlags(ClassFile.ACC_PRIVATE)
                .with(SignatureAttribute.of(Signature.parseFrom("Ljava/util/List<+Lio/jccl/tools/TypeArg;>;"))));
            cb.with(RuntimeVisibleAnnotationsAttribute.of(Annotation.of(                    // annotation and values
                ClassDesc.of("io.jccl.tools.Marker"),
                AnnotationElement.ofClass("value", ClassDesc.of("io.jccl.tools.ClassValue")),
                AnnotationElement.of("mode", AnnotationValue.ofEnum(ClassDesc.of("io.jccl.tools.EnumValue"), "A")))));
            cb.withMethod("declared", MethodTypeDesc.of(ConstantDescs.CD_void,               // method descriptor only
                ClassDesc.of("io.jccl.tools.ParamType")), ClassFile.ACC_PUBLIC | ClassFile.ACC_ABSTRACT, mb -> mb
                .with(SignatureAttribute.of(MethodSignature.parseFrom(
                    "(Lio/jccl/tools/ParamType;)V^Lio/jccl/tools/Thrown;"))));                 // generic throws only
            cb.withMethodBody("body", MethodTypeDesc.of(ConstantDescs.CD_void),
                ClassFile.ACC_PUBLIC | ClassFile.ACC_STATIC, code -> {
                    code.invokestatic(ClassDesc.of("io.jccl.collectives.Owner"), "run",       // owner: class entry;
                        MethodTypeDesc.of(ConstantDescs.CD_void, ClassDesc.of("io.jccl.tools.NatParam"))); // n&t only
                    code.ldc(ClassDesc.of("io.jccl.collectives.Literal"));                     // class literal
                    code.pop();
                    Label start = code.newBoundLabel();
                    code.aconst_null();
                    code.astore(0);
                    Label end = code.newBoundLabel();
                    code.localVariable(0, "local", ClassDesc.of("io.jccl.tools.LocalType"), start, end); // debug info
                    code.return_();
                });
        });
    }

    private static final Set<String> FORBIDDEN = Set.of(
        "io.jccl.collectives.Base", "io.jccl.tools.FieldType", "io.jccl.tools.TypeArg", "io.jccl.tools.Marker",
        "io.jccl.tools.ClassValue", "io.jccl.tools.EnumValue", "io.jccl.tools.ParamType", "io.jccl.tools.Thrown",
        "io.jccl.collectives.Owner", "io.jccl.tools.NatParam", "io.jccl.collectives.Literal",
        "io.jccl.tools.LocalType");

    private static Path writeFixture(Path dir) throws IOException {
        Path file = dir.resolve("io/jccl/transport/tcp/Fixture.class");
        Files.createDirectories(file.getParent());
        Files.write(file, fixture());
        return dir;
    }

    @Test
    void shouldFindEveryKindOfReference() {
        SortedSet<String> found = ArchitectureRules.referencesOf(fixture());
        for (String target : FORBIDDEN) {
            assertTrue(found.contains(target), target + " not found in " + found);
        }
        assertTrue(found.contains("io.jccl.verbs.spi.VerbsProvider"), found.toString());
        assertTrue(found.contains("java.util.List"), found.toString());
    }

    @Test
    void shouldReportEveryForbiddenReferenceAndNothingElse(@TempDir Path dir) throws IOException {
        List<Violation> violations = PROVIDER_RULE.violationsIn(writeFixture(dir));
        SortedSet<String> targets = new TreeSet<>();
        for (Violation v : violations) {
            assertEquals("io.jccl.transport.tcp.Fixture", v.origin());
            assertEquals("providers depend only on the verbs API", v.rule());
            targets.add(v.target());
        }
        assertEquals(new TreeSet<>(FORBIDDEN), targets);
    }

    @Test
    void shouldFailNamingTheRuleTheClassAndWhatItReferences(@TempDir Path dir) throws IOException {
        AssertionError error = assertThrows(AssertionError.class, () -> PROVIDER_RULE.check(writeFixture(dir)));
        assertTrue(error.getMessage().contains(
                "providers depend only on the verbs API: io.jccl.transport.tcp.Fixture references io.jccl.collectives.Base"),
            error.getMessage());
        assertFalse(error.getMessage().contains("references io.jccl.verbs.spi.VerbsProvider"), error.getMessage());
    }

    @Test
    void shouldPassWhenEveryReferenceIsAllowed(@TempDir Path dir) throws IOException {
        Rule everything = ArchitectureRules.rule("anything goes").allow("io.jccl..");
        everything.check(writeFixture(dir));
    }

    /** The same on classes javac made: jccl-common's rule (JDK only) applied to this test, which uses JUnit. */
    @Test
    void shouldFindViolationsInJavacOutput() {
        Rule jdkOnly = ArchitectureRules.rule("jccl-common depends on the JDK only").governs("..")
            .allow("java..", "javax..", "jdk..", "io.jccl.common..");
        List<Violation> violations = jdkOnly.violationsIn(ArchitectureRules.testClasses());
        assertTrue(violations.contains(new Violation("jccl-common depends on the JDK only",
            ArchitectureRulesTest.class.getName(), "org.junit.jupiter.api.Test")), violations.toString());
        assertTrue(violations.contains(new Violation("jccl-common depends on the JDK only",
            ArchitectureRulesTest.class.getName(), "org.junit.jupiter.api.io.TempDir")), violations.toString());
    }

    @Test
    void shouldRefuseToPassOnNothing(@TempDir Path dir) {
        AssertionError error = assertThrows(AssertionError.class, () -> PROVIDER_RULE.check(dir));
        assertTrue(error.getMessage().contains("no class files"), error.getMessage());
        assertThrows(AssertionError.class, () -> PROVIDER_RULE.check(dir.resolve("absent")));
    }

    @Test
    void shouldMatchPackagesExactlyOrAsTrees() {
        assertTrue(ArchitectureRules.matches("io.jccl.verbs", "io.jccl.verbs"));
        assertFalse(ArchitectureRules.matches("io.jccl.verbs", "io.jccl.verbs.spi"));
        assertTrue(ArchitectureRules.matches("io.jccl.verbs..", "io.jccl.verbs.spi"));
        assertTrue(ArchitectureRules.matches("io.jccl.verbs..", "io.jccl.verbs"));
        assertFalse(ArchitectureRules.matches("io.jccl.verbs..", "io.jccl.verbsx"));
        assertTrue(ArchitectureRules.matches("..", "org.junit"));
        assertEquals("io.jccl.verbs", ArchitectureRules.packageOf("io.jccl.verbs.Verbs$1"));
        Rule onlyJccl = ArchitectureRules.rule("r").allow("io.jccl.verbs");
        assertTrue(onlyJccl.allows("org.junit"), "packages outside io.jccl.. are not checked by default");
        assertFalse(onlyJccl.allows("io.jccl.verbs.spi"));
    }

    @Test
    void shouldListPackagesWithPublicTypesButNoPackageInfo(@TempDir Path sources) throws IOException {
        write(sources, "a/b/Public.java", "package a.b;\n\n/** x */\npublic final class Public {\n}\n");
        write(sources, "a/c/Hidden.java", "package a.c;\n\nfinal class Hidden {\n    public static class Nested {}\n}\n");
        write(sources, "a/d/Documented.java", "package a.d;\n\npublic record Documented(int x) {\n}\n");
        write(sources, "a/d/package-info.java", "/** d */\npackage a.d;\n");
        write(sources, "a/e/Api.java", "package a.e;\n\npublic sealed interface Api permits Impl {\n}\n");
        assertEquals(new TreeSet<>(Set.of("a.b", "a.e")), ArchitectureRules.packagesWithoutPackageInfo(sources));

        ArchitectureRules.checkPackageInfo(sources, Set.of("a.b", "a.e"));
        AssertionError added = assertThrows(AssertionError.class,
            () -> ArchitectureRules.checkPackageInfo(sources, Set.of("a.b")));
        assertTrue(added.getMessage().contains("need a package-info.java") && added.getMessage().contains("a.e"),
            added.getMessage());
        AssertionError stale = assertThrows(AssertionError.class,
            () -> ArchitectureRules.checkPackageInfo(sources, Set.of("a.b", "a.e", "a.d")));
        assertTrue(stale.getMessage().contains("known-missing") && stale.getMessage().contains("a.d"),
            stale.getMessage());
    }

    private static void write(Path root, String relative, String text) throws IOException {
        Path file = root.resolve(relative);
        Files.createDirectories(file.getParent());
        Files.writeString(file, text);
    }
}
