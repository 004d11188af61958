//! Every registered preconditioner name reads the same from the command
//! line (`name:key=value,...`), case.toml (`preconditioner = { name = ...,
//! key = value }`) and fvSolution (`preconditioner { preconditioner name;
//! key value; }`): the three front ends share `solve::registry::parse`.

use std::path::Path;

use crate::foam::foam_dict::FoamDict;
use crate::foam::FoamFile;
use crate::solve::registry::PRECONDITIONERS;
use crate::solve::Preconditioner;

/// Keys to give with a name (none for the others).
fn sample_keys(name: &str) -> &'static [(&'static str, &'static str)] {
    match name {
        "DIC" | "IC0" => &[("precision", "mixed")],
        "ILU" => &[("fillLevel", "1")],
        // PCG takes RAS without overlap only.
        "RAS" => &[("subdomains", "4"), ("overlap", "0")],
        "AS" => &[("subdomains", "4"), ("overlap", "1")],
        "FSAI" => &[("steps", "5"), ("epsilon", "0.001")],
        "AMG" | "GAMG" => &[("cycle", "W"), ("nPreSweeps", "2"), ("nPostSweeps", "2")],
        "Chebyshev" | "leastSquares" => &[("degree", "3"), ("eigenBound", "Lanczos")],
        "blockIC" | "blockDIC" => &[("blockSize", "64")],
        "blockJacobi" => &[("inner", "CG"), ("innerMaxIter", "20")],
        "symGaussSeidel" | "Jacobi" => &[("nSweeps", "2")],
        "SSOR" => &[("omega", "1.3")],
        "truncatedNeumann" => &[("order", "2")],
        "neu" => &[("order", "3")],
        _ => &[],
    }
}

fn from_command_line(name: &str, keys: &[(&str, &str)]) -> Result<Preconditioner, String> {
    let pairs: Vec<String> = keys.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let spec = match pairs.is_empty() {
        true => name.to_string(),
        false => format!("{name}:{}", pairs.join(",")),
    };
    spec.parse()
}

fn toml_value(value: &str) -> String {
    match value.parse::<f64>() {
        Ok(_) => value.to_string(),
        Err(_) => format!("\"{value}\""),
    }
}

fn from_case_toml(name: &str, keys: &[(&str, &str)]) -> Result<Preconditioner, String> {
    let mut table = format!("name = \"{name}\"");
    for (k, v) in keys {
        table += &format!(", {k} = {}", toml_value(v));
    }
    let text =
        format!("[mesh]\nsource = \"box:2x2x2\"\n[solver.T]\npreconditioner = {{ {table} }}\n");
    super::case_toml::parse_case(&text, Path::new("case.toml"), Path::new("."))
        .map(|setup| setup.solver.regular.preconditioner)
        .map_err(|e| e.to_string())
}

fn from_fv_solution(name: &str, keys: &[(&str, &str)]) -> Result<Preconditioner, String> {
    let mut body = format!("preconditioner {{ preconditioner {name};");
    for (k, v) in keys {
        body += &format!(" {k} {v};");
    }
    body += " }\nsolver PCG;\ntolerance 1e-6;\n";
    let file =
        FoamFile::from_bytes("fvSolution".into(), body.into_bytes()).map_err(|e| e.to_string())?;
    let dict = FoamDict::from_file(&file).map_err(|e| e.to_string())?;
    super::openfoam::preconditioner(&dict).map_err(|e| e.to_string())
}

#[test]
fn every_registered_name_reads_the_same_in_all_three_grammars() {
    let mut parsed = 0;
    for registration in PRECONDITIONERS {
        for name in registration.names {
            let keys = sample_keys(name);
            let cli = from_command_line(name, keys);
            let toml = from_case_toml(name, keys);
            let foam = from_fv_solution(name, keys);
            match (&cli, &toml, &foam) {
                (Ok(a), Ok(b), Ok(c)) => {
                    assert_eq!(a, b, "{name}: command line and case.toml");
                    assert_eq!(a, c, "{name}: command line and fvSolution");
                    parsed += 1;
                }
                // The nonsymmetric smoothers cannot precondition PCG, nor `iluk` without K.
                (Err(a), Err(b), Err(c)) => {
                    for e in [a, b, c] {
                        assert!(
                            e.contains("not symmetric") || e.contains("needs its fill level"),
                            "{name}: {e}"
                        );
                    }
                }
                _ => panic!("{name}: {cli:?} / {toml:?} / {foam:?}"),
            }
        }
    }
    assert!(parsed >= 25, "{parsed} names parsed");
}

#[test]
fn an_unknown_key_is_refused_alike() {
    let keys = [("steps", "5"), ("tolerance", "1")];
    for err in [
        from_command_line("FSAI", &keys).unwrap_err(),
        from_case_toml("FSAI", &keys).unwrap_err(),
    ] {
        assert!(err.contains("unknown FSAI key 'tolerance'"), "{err}");
    }
    // fvSolution reads only the registration's keys from the dictionary
    // (a flat solver dictionary holds the solver's keys beside them).
    let err = from_fv_solution("SPAI", &[]).unwrap_err();
    assert!(
        err.contains("unknown preconditioner 'SPAI' (choose one of DIC"),
        "{err}"
    );
}
