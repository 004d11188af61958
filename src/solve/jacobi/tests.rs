use super::*;
use crate::solve::precondition::Precondition;
use crate::solve::registry::{self, GpuSupport, Role};
use crate::sparse::testing::random_symmetric;

#[test]
fn jacobi_divides_by_the_diagonal_and_identity_copies() {
    let a = random_symmetric(30, 5, 4);
    let jacobi = JacobiSettings.build_cpu(&a).unwrap();
    let r: Vec<f64> = (0..30).map(|i| (i as f64 * 0.7).cos()).collect();
    let mut z = vec![f64::NAN; 30];
    jacobi.apply(&r, &mut z);
    for i in 0..30 {
        let (cols, vals) = a.row(i);
        let d: f64 = cols
            .iter()
            .zip(vals)
            .filter(|(&c, _)| c as usize == i)
            .map(|(_, v)| v)
            .sum();
        assert_eq!(z[i], (1.0 / d) * r[i], "row {i}");
    }
    let mut copy = vec![f64::NAN; 30];
    LinearOperator::apply(&Identity(30), &r, &mut copy);
    assert_eq!(copy, r);
}

#[test]
fn is_one_linear_precondition_of_host_vectors() {
    let a = random_symmetric(12, 3, 2);
    let jacobi = Jacobi::new(&a).unwrap();
    let r: Vec<f64> = (0..12).map(|i| i as f64 - 6.0).collect();
    let (mut z1, mut z2) = (vec![0.0; 12], vec![0.0; 12]);
    LinearOperator::apply(&jacobi, &r, &mut z1);
    Precondition::<Vec<f64>>::apply(&jacobi, &r, &mut z2).unwrap();
    assert_eq!(z1, z2);
    assert_eq!(Precondition::<Vec<f64>>::n(&jacobi), 12);
    assert!(Precondition::<Vec<f64>>::is_linear(&jacobi));
}

#[test]
fn parses_through_the_registry_and_refuses_bad_input() {
    for spec in ["jacobi", "diagonal", "Diagonal", "JACOBI"] {
        let p: Preconditioner = spec.parse().unwrap();
        assert_eq!(p, Preconditioner::from(JacobiSettings), "{spec}");
        assert_eq!(p.to_string().parse::<Preconditioner>(), Ok(p));
        assert!(!p.is_flexible() && p.check().is_ok());
    }
    let err = "jacobi:omega=0.8".parse::<Preconditioner>().unwrap_err();
    assert!(
        err.contains("unknown diagonal key 'omega' (diagonal takes no keys)"),
        "{err}"
    );
    let mut keys = KeyValues::new();
    keys.push("omega", "0.8");
    let err = JacobiSettings::from_keys(&keys).unwrap_err();
    assert!(err.contains("takes no keys, got 'omega'"), "{err}");
    // A zero diagonal entry is named by its row, never divided by.
    let mut a = random_symmetric(10, 3, 1);
    let diagonal = a.row(6).0.iter().position(|&c| c == 6).unwrap();
    let start = a.row_ptr()[6];
    a.values_mut()[start + diagonal] = 0.0;
    let err = Jacobi::new(&a).err().unwrap().to_string();
    assert!(err.contains('6'), "{err}");
}

#[test]
fn the_device_runs_it_as_given_for_every_method() {
    let p = Preconditioner::from(JacobiSettings);
    for role in [Role::Pcg, Role::Krylov] {
        assert_eq!(registry::gpu_support(&p, role), GpuSupport::Native);
    }
}
