"""The coding task (SPEC section 10): small repositories with a bug and a protected test suite, and
the scripted attempts the `coding` engine scores in the sandbox."""
