fn main() {
    std::process::exit(fvpoisson::cli::main());
}
